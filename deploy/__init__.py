"""Deployment helpers (not installed with the package): schema generation, the constraints
file, the Helm chart renderer's Go source (deploy/helmrender) and the vendored Compose
Specification schema."""
