"""Kafka and Faust: topics, codec, producer, the projector agent and the local broker."""
