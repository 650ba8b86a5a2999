"""The shared kernel, the ground floor every room stands on: the config model, the Kafka client factory and its error
text, time, errors, waiting, process helpers, the worker-status contract and its board, the ledger of records a link
lost, the latency histogram, the rename policy, the provenance headers, the regex and ACL rules, the HTTP API's web
config.

Imports: nothing of the project outside this folder (the standard library and the client libraries only)."""
