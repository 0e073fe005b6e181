"""The relay: verified deliveries kept outside the firewall, and the cluster's drain of them."""
