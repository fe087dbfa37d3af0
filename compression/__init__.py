"""Gradient compression: DCT chunking, top-k coding, and the payload wire format.

Never imports ``distro_node.protocol`` or ``distro_node.node``.
"""
