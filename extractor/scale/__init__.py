"""Runs over many texts on a cluster: ``extractor batch --ray`` (Ray Data) and its sharded output.

Ray is imported only by :mod:`extractor.scale.ray_batch`, when a distributed batch runs.
"""
