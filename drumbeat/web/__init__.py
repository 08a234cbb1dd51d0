"""The operator's face of a running crawl: the dashboard, the control API, ``/metrics``
and ``drumbeat ctl`` (issue 50). It runs on the manager's event loop
(``server.WebServer``), steers the crawl through ``drumbeat.manager.controls.Controls``
and reads the manager's stats.

- ``app``: the routes and their access rules; ``pages``: the dashboard's page (package
  data in ``static/``) and its event stream; ``dashboard``: the snapshot it streams;
  ``metrics``: ``/metrics``; ``status``: ``/api/status``; ``client``: ``drumbeat ctl``.
- ``cluster``: ``drumbeat web --redis``, the same page over a whole cluster, read-only.
- ``address``: the ``--web`` value, parsed without importing the server.

Files in the state directory while a crawl with its web server runs::

    DIR/web.json    {"url": "http://127.0.0.1:PORT", "pid": PID}; removed at the end
    DIR/web.token   the bearer token of this run (mode 0600), secrets.token_urlsafe
"""

# The two files by name: ``drumbeat ctl`` reads them without importing the server (aiohttp).
WEB_JSON = "web.json"
WEB_TOKEN = "web.token"
