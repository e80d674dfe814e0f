from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "cluster"
    verbose_name = "Cluster and sandboxes"

    def ready(self) -> None:
        from agentos.core import vault

        # The control plane's SSH private key: re-encrypted by a vault rotation.
        vault.register("cluster.ControlKey", "ciphertext")
