def key(version):
    """The sort key of a release number such as v1.10.2."""
    return version.lstrip("v")


def latest(versions):
    return max(versions, key=key)


def ordered(versions):
    return sorted(versions, key=key)
