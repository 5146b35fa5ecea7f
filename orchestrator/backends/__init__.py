"""Back-ends of the distributed seam."""
