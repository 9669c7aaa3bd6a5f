"""The artifact store and builds: content keys, locked and verified builds, replay of an unchanged build."""
