"""FastDeploy's ResourceManagerV1: its loop, policies, commit table and worker rules."""
