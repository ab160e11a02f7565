"""The names the secured test broker and its PKI share: who the mutual-TLS client is,
and whose OAUTHBEARER tokens the broker accepts. Here, apart from both, so that the broker's
settings (``_genuine_security``) need not import the PKI (which needs ``cryptography``)
and the PKI need not import the broker's settings."""

TOKEN_ISSUER = "https://idp.eosflow.test"  # what the broker expects of OAUTHBEARER tokens
TOKEN_AUDIENCE = "kafka"
CLIENT_CN = "app-client"  # the mutual-TLS client certificate's CN (_pki)
