"""The plan explorer: server-rendered pages under `/ui/` (Jinja2 templates) that read the
JSON API from the browser, with Chart.js served from `app/ui/static/vendor/` (no request
leaves the machine). `app.ui.routes.router` is the one thing `app.main` includes."""
