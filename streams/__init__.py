"""The shell: the bus (Kafka), Redis, the live worker, the embedded replay's runs, the crawler
integrations and the CLI. It wires the core (online/) and the offline tools (batch/) together;
no other floor imports it.
"""

import online  # noqa: F401  (first: FAISS's OpenBLAS picks its kernels as it loads; online.blas)
