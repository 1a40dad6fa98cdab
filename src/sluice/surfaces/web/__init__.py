"""The web dashboard: a Starlette app (:mod:`.app`), how it is served (:mod:`.serve`), its static page."""
