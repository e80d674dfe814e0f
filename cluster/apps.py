from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "cluster"
    verbose_name = "Cluster and sandboxes"

    def ready(self) -> None:
        from agentos.core.vault import VAULT_FIELDS

        # The control plane's SSH private key: re-encrypted by a vault rotation.
        VAULT_FIELDS.add("cluster.ControlKey", "ciphertext")
