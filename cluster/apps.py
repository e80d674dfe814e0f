from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "cluster"
    verbose_name = "Cluster and sandboxes"

    def ready(self) -> None:
        from agentos.core.scrubber import SECRET_SOURCES
        from agentos.core.vault import VAULT_FIELDS
        from cluster import bridges

        # The control plane's SSH private key: re-encrypted by a vault rotation.
        VAULT_FIELDS.add("cluster.ControlKey", "ciphertext")
        # The owner's API bridges' keys: re-encrypted by a rotation, scrubbed from everything kept.
        VAULT_FIELDS.add("cluster.ApiBridge", "ciphertext")
        SECRET_SOURCES.add("bridge keys", bridges.secrets)
