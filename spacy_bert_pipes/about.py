__title__ = "spacy-bert-pipes"
__version__ = "0.1.0"
