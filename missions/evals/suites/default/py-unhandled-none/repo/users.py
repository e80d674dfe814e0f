def display_name(user):
    """The nickname when the user set one, else "First Last"."""
    if user.get("nickname").strip():
        return user["nickname"].strip()
    return f"{user['first']} {user['last']}"
