"""What operators read from outside: the cluster's status."""
