"""The core: the domain and the one code path, pure (no Kafka, no Redis, no file I/O).

Events, links, history, features, the related-page index and search, scorers (by name in
`online.scorers`), learners, priorities, and the pipeline (`online.pipeline`) with the page-store
protocol and its in-memory store (`online.stores`). Imports nothing from batch/ or streams/.
"""

from online.blas import prefer_cpu_kernels

prefer_cpu_kernels()  # before any module here loads FAISS, whose OpenBLAS reads it then
