"""The commands a caller may give, each in one place: validated, decided as the projection will
decide it, appended to the log and answered (``commands.writes``).

The API's routes, the demo seeding and the tests call these; a refusal is a ``Refused`` whose
``status`` is the HTTP status that names it, so the API maps it one to one.
"""
