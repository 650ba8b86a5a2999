"""The benchmarks (`python -m bench`): mirrorwatch against its peers measured in the same run, ratios printed.

Imports: the product (`mirrorwatch`, the domains, `localkafka`, `kernel`); never the tests."""
