"""The oversell master: NodeProfile reports -> predicted online peak -> node batch resources."""
