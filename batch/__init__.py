"""Offline learning and evaluation, above the core: datasets, models, the model registry,
training, metrics, evaluation and reports, the experiment, the crawl generator, the
closed-loop simulation, and the files both floors share (the run directory's names, the
events-file reader). Imports online/, never streams/.
"""

import online  # noqa: F401  (first: FAISS's OpenBLAS picks its kernels as it loads; online.blas)
