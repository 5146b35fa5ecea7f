"""Distribution seam: remote jobs, the invocation service, and the in-process transport."""
