"""Parent (upstream) proxies for the e2e suite: Squid (Basic, Negotiate) and Apache as an NTLM proxy."""
