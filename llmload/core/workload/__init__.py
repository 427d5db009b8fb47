"""What a workload is made of, as data: length distributions and their draws (`lengths`), prompt
files and their replies (`prompt_files`), request traces (`trace_file`) and the peers'
conversation traces (`conversations`, `dag_trace`; `trace_formats` tells the formats apart), the
tools and response schemas a request carries (`reply_shapes`), and llmload's model of a BPE
tokenizer that counts a text's tokens (`token_count`).

May import: the rest of `llmload.core`; nothing of llmload outside it.
"""
