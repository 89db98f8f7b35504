"""Tempo: compiled dynamic deep learning with recurrent tensors."""
__version__ = "0.1.0"
