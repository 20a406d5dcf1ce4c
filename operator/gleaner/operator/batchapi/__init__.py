"""The OpenAI-compatible Batch API the operator serves (docs/batch.md, "The Batch API").

``objects`` (pure): OpenAI file and batch objects from the file store's records and the
backing OfflineJob; ``files`` (I/O): the API's own file store, a directory;
``auth``: ServiceAccount tokens (TokenReview) and per-namespace rights
(SubjectAccessReview) through gleaner.clients.kube; ``app``: the FastAPI app.
"""
