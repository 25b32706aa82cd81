"""Profiles: stacks and weights from records + symbols; reports and exporters."""
