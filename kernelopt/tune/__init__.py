"""`kernelopt tune`: a local web workbench for tuning one kernel by hand (docs/tune.md).

- workbench.py: `Workbench`, the page's view of a `kernelopt.agent.session.Session`: the state
  it shows, the actions it starts (one at a time, on a worker thread), highlighting and diffs.
- events.py: `EventHub`, the live event stream (server-sent events) fed from any thread.
- app.py: the FastAPI app: the token every request needs, the JSON API, the page.
- server.py: `TuneServer`, uvicorn serving the app from a background thread.
- static/: the page (HTML, script, style), written for this package: nothing is fetched from
  elsewhere and nothing is built at install time.

Sits above kernelopt.agent (it drives a Session); only kernelopt.cli.tune imports it.
"""
