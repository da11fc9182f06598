"""xplore"""
