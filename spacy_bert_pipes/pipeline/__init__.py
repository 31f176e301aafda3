"""spaCy components: one module per factory."""
