"""The commands a caller may give, each in one place: validated, decided as the projection will
decide it, appended to the log and answered (``commands.writes``; what they take and answer in
``commands.answers``).

The API's routes and the tests call these; a refusal is a ``Refused`` whose ``status`` is the HTTP
status that names it, so the API maps it one to one. ``engram produce`` (and the demo seeding)
append whole files through the same pipeline (``streams.pipeline``): the same checks, embedding,
sealing and encoding, and the part of the projector's decision that needs no tenant facts (a
tenant's store has one opener, the running server); the projector decides the rest and
dead-letters what it refuses.
"""
