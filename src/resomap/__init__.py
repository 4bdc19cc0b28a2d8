"""ResoMap: how input resolution changes what an image classifier learns, what it costs, and where it looks."""

__version__ = "0.1.0"
