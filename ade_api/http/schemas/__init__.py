"""The API's wire schemas (pydantic), one module per resource, apart from the database rows
they are read from. It re-exports nothing: a route imports each schema from its resource's
module (`ade_api.http.schemas.runs`, `.rules`, ...). Its modules may import ade_tasks (the rows and
the domain checks a field runs) and each other, never a route or the app."""
