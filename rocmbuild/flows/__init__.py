"""The stories the verbs tell, composed from the packages below: build, apply, manage, export."""
