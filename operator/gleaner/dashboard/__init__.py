"""Dashboard: the FastAPI app with the cluster pages and the JSON API."""
