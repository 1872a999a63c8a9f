"""Network-authentication test rig (Apache httpd Basic / Digest / NTLM /
Negotiate / IIS-like / mutual-TLS vhosts + a throwaway MIT Kerberos realm)
for the authproxy end-to-end suite.  See rig.py and README.md.
"""
