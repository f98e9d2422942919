"""The commands a caller may give, each in one place: validated, decided as the projection will
decide it, appended to the log and answered (``commands.writes``).

The API's routes and the tests call these; a refusal is a ``Refused`` whose ``status`` is the HTTP
status that names it, so the API maps it one to one. ``engram produce`` (and the demo seeding)
append whole files: they share the validation (``streams.ingest.prepare``) and the producer, but
not the pre-check, because a tenant's store has one opener, the running server; the projector
decides and dead-letters what it refuses.
"""
