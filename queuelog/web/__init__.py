"""The browser side: GraphiQL served from the app's own assets, and the jobs dashboard at `/`.

Both pages are static HTML plus plain JavaScript modules that speak only the public GraphQL
API with the key a person types (kept in the tab's sessionStorage). Every script, stylesheet
and font is served from `/static/`, out of the Python package; nothing is fetched from
elsewhere. `routes(settings)` gives the routes to mount; `graphiql_page(settings)` is what
GET /graphql answers (app.py hands it to Strawberry's view).
"""

from queuelog.web.pages import graphiql_page, routes

__all__ = ["graphiql_page", "routes"]
