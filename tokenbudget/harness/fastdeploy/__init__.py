"""FastDeploy's real scheduler (``ResourceManagerV1``) as a target."""
