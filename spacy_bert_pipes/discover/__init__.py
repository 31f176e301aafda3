"""New intents among the docs a router did not route: `bert-pipes discover`.

From a `bert-pipes annotate` OUTPUT with its `route` column, the docs sent
`out_of_scope` (and `ambiguous`, when asked) are clustered on their vectors,
as many clusters as the data holds, and each cluster is described for a
person to review: its size, the words that set it apart, a suggested name,
the nearest known label and a few representative docs. The review, with its
actions filled in, gives `bert-pipes add-label --review` the new labels and
their examples.

The package: `pool` reads the OUTPUT, `cluster` clusters unit vectors (K from
the data or given, or by density), `describe` names and places a cluster,
`labels` gives the known labels as vectors, `run` puts them together
(`discover`), `review` writes the files and reads the review back, `picture`
draws the clusters among the labels, `score` scores clusters against true
intents where a benchmark knows them.
"""

from .cluster import (
    DEFAULT_CLUSTERS,
    NOISE,
    choose_k,
    cluster_pool,
    density_clusters,
    kmeans_clusters,
    knn_graph,
)
from .describe import (
    MERGE_COSINE,
    NEAR_COSINE,
    keywords,
    merge_proposals,
    representatives,
    suggested_name,
)
from .labels import LabelSpace
from .pool import Pool, read_pool
from .review import (
    ASSIGNMENTS,
    PICTURE,
    REVIEW,
    SUMMARY,
    DiscoveryFiles,
    ReviewRow,
    read_discovery,
    read_review,
    review_examples,
    write_discovery,
)
from .run import N_REPRESENTATIVES, Cluster, Discovery, discover
from .score import (
    baseline_clusters,
    discovered_intents,
    frozen_vectors,
    label_intents,
    routed_to_intents,
    score_clusters,
    score_pool,
)

__all__ = [
    "ASSIGNMENTS",
    "Cluster",
    "DEFAULT_CLUSTERS",
    "Discovery",
    "DiscoveryFiles",
    "LabelSpace",
    "MERGE_COSINE",
    "NEAR_COSINE",
    "N_REPRESENTATIVES",
    "NOISE",
    "PICTURE",
    "Pool",
    "REVIEW",
    "ReviewRow",
    "SUMMARY",
    "baseline_clusters",
    "choose_k",
    "cluster_pool",
    "density_clusters",
    "discover",
    "discovered_intents",
    "frozen_vectors",
    "keywords",
    "kmeans_clusters",
    "knn_graph",
    "merge_proposals",
    "label_intents",
    "read_discovery",
    "read_pool",
    "read_review",
    "representatives",
    "review_examples",
    "routed_to_intents",
    "score_clusters",
    "score_pool",
    "suggested_name",
    "write_discovery",
]
