"""What perfpredict knows of the hardware: the device catalog (devices on device_records, device_types and
cpu_detection), the calibration in use (user_config), prices and cost, carbon, MIG slices and training precisions.
"""
