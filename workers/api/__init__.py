"""``adk-celery api``: HTTP in front of the orchestrators (google-adk's routes and more).

Stateless: any number of server processes in front of the same Redis. The server enqueues
and follows invocations; it never runs an agent. See :func:`workers.api.app.create_app`.
"""
