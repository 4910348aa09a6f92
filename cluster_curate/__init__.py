"""cluster-curate: learning-effect clustering, balanced selection and data-parallel allocation."""

__version__ = "0.1.0"
