"""`python -m spacy_bert_pipes ...` runs the `bert-pipes` command line."""

from .cli import app

if __name__ == "__main__":
    app()
