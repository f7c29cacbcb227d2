"""Shared by the Python peers in bench/ (gloo-allreduce.py, gloo-model.py)."""
import socket


def free_port():
    """An ephemeral TCP port on 127.0.0.1 that was free a moment ago (for the rendezvous store)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
