"""batches"""
