"""Deployment assets of tierd: compose files, the process launcher
(``python -m deploy.launcher``) and the operator scenarios
(``python -m deploy.scenarios.<name>``)."""
