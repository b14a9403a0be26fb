"""``GET .../events``: committed updates and evaluation changes as Server-Sent Events."""
