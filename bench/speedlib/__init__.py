"""The parts of bench/speed.py, one concern a module: `workloads` (the texts, the
words and the settings), `systems` (ours and the bare forward) and `references`
(spacy-transformers and Hugging Face pipelines), `timing` (one system in a fresh
process: warm-up, timed runs, peak memory; the machine and versions) and `table`
(the record a run writes, the ratios, and bench/speed_table.py's tables)."""
