"""mirrorwatch: mirror Apache Kafka topics between clusters and watch the mirror with numbers you can trust."""

__version__ = "0.1.0"
__all__ = ["__version__"]
