"""The tests: pure cores without brokers, everything that touches Kafka against real local clusters (`conftest.py`).

Imports: anything of the project, the benchmarks included (their pure parts are tested here); nothing imports them."""
