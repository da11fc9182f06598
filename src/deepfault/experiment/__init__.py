"""experiment"""
