"""The files a run leaves and how they are read and written: per-request records (`records`), their
chunk-times index (`chunk_index`), the one tolerant JSON-lines reader (`jsonl`), every file of a
run named in one place (`run_files`), the run file's one reader and its typed contents (`run_info`),
the errors a run file carries (`run_errors`), and output
paths checked before anything is written (`output_paths`).

May import: the rest of `llmload.core`; nothing of llmload outside it.
"""
