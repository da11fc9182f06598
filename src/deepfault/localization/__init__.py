"""localize"""
