"""spaCy components: a factory and its settings per module (`textcat.py`, `ner.py`,
`qa.py`, ...), the larger pipes beside them (`textcat_pipe.py`, `ner_pipe.py`) with
the helpers each owns."""
