"""karmadaquota: global hard quotas for Karmada multi-cluster workloads.

Importing the package loads only the pure core (no Kubernetes client, no aiohttp): the decision
modules are `quantity`, `resources`, `scopes`, `charge`, `evaluate` and `validation`.
"""

__version__ = "0.1.0"
