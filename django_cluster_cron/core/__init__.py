"""The pure scheduling core: no Django, Redis or Celery imports here, and ``now`` is always an
argument. The adapters (ORM store, Redis lease, Celery dispatch) build on it."""
